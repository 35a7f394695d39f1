// group.js BROKER TOPIC GROUP PARTITIONS COUNT: two consumers in one group share TOPIC's partitions.
// Ends when their assignments (after their latest join) split all PARTITIONS between them, under the
// same leader, and every one of the COUNT records was read once or more.
'use strict'
const { kafka, run } = require('./common')

const [topic, groupId, partitions, count] = process.argv.slice(3)

run(async () => {
  const keys = new Set()
  const assignments = [null, null]
  const members = [0, 1].map(i => kafka(`kafkajs-member-${i}`).consumer({
    groupId, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200
  }))
  let settle
  const settled = new Promise(resolve => { settle = resolve })
  const check = () => {
    const [a, b] = assignments
    if (!a || !b || a.leaderId !== b.leaderId || keys.size < Number(count)) return
    const all = [...a.partitions, ...b.partitions].sort((x, y) => x - y)
    if (all.length === Number(partitions) && all.every((p, i) => p === i)) settle()
  }
  await Promise.all(members.map(async (consumer, i) => {
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      assignments[i] = {
        leaderId: payload.leaderId,
        isLeader: payload.isLeader,
        partitions: (payload.memberAssignment[topic] || []).slice().sort((x, y) => x - y)
      }
      check()
    })
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({ eachMessage: async ({ message }) => { keys.add(message.key.toString()); check() } })
  }))
  await settled
  const result = { assignments: assignments.map(a => ({ partitions: a.partitions, isLeader: a.isLeader })), read: keys.size }
  await Promise.all(members.map(consumer => consumer.disconnect()))
  return result
})
