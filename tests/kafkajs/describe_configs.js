// describe_configs.js BROKER TOPIC: what kafkajs' own spec src/broker/__tests__/describeConfigs.spec.js
// asks of a new topic: two named configs with synonyms (compared by position), then all of them
// with an empty name list.
'use strict'
const { kafka, run } = require('./common')

const [topic] = process.argv.slice(3)
const TOPIC = 2

run(async () => {
  const admin = kafka('kafkajs-describe-configs').admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic }], waitForLeaders: true })
  const named = await admin.describeConfigs({
    includeSynonyms: true,
    resources: [{ type: TOPIC, name: topic, configNames: ['compression.type', 'retention.ms'] }]
  })
  const all = await admin.describeConfigs({ includeSynonyms: false, resources: [{ type: TOPIC, name: topic, configNames: [] }] })
  await admin.disconnect()
  return { named: named.resources, all: all.resources[0].configEntries.map(e => e.configName) }
})
