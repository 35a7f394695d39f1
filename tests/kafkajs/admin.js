// admin.js BROKER TOPIC GROUP: createTopics (3 partitions), createTopics again (exists),
// fetchTopicMetadata, listGroups, describeGroups and fetchOffsets of GROUP on TOPIC.
'use strict'
const { kafka, run } = require('./common')

const [topic, groupId] = process.argv.slice(3)

run(async () => {
  const admin = kafka('kafkajs-admin').admin()
  await admin.connect()
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
  const createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }] })
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] })
  const listed = await admin.listTopics()
  const groups = await admin.listGroups()
  const described = await admin.describeGroups([groupId])
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] })
  await admin.disconnect()
  return {
    created,
    createdAgain,
    partitions: metadata.topics[0].partitions.map(p => ({ id: p.partitionId, leader: p.leader, replicas: p.replicas })),
    listed: listed.includes(topic),
    groups: groups.groups,
    described: described.groups.map(g => ({ groupId: g.groupId, state: g.state, protocolType: g.protocolType, members: g.members.length })),
    offsets: offsets[0].partitions.map(p => ({ partition: p.partition, offset: p.offset }))
  }
})
