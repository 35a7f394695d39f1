// consume.js BROKER TOPIC GROUP COUNT: read COUNT records in consumer group GROUP from the
// beginning, commit the offsets after the last record of each partition, leave the group.
'use strict'
const { kafka, run } = require('./common')

const [topic, groupId, count] = process.argv.slice(3)

run(async () => {
  const consumer = kafka('kafkajs-consumer').consumer({
    groupId, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  const records = []
  const next = {}
  await new Promise((resolve, reject) => {
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        records.push({
          partition,
          offset: message.offset,
          key: message.key.toString(),
          value: message.value.toString(),
          headers: Object.fromEntries(Object.entries(message.headers).map(([k, v]) => [k, v.toString()]))
        })
        next[partition] = String(Number(message.offset) + 1)
        if (records.length >= Number(count)) resolve()
      }
    }).catch(reject)
  })
  const offsets = Object.entries(next).map(([partition, offset]) => ({ topic, partition: Number(partition), offset }))
  await consumer.commitOffsets(offsets)
  await consumer.disconnect()
  return { records, committed: offsets }
})
