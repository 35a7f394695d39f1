// produce.js BROKER TOPIC COUNT [idempotent]: keyed records with two headers, gzip, acks=all.
// Prints the partition/base offset of every send and the producer's own view of what it sent.
'use strict'
const { CompressionTypes } = require('kafkajs')
const { kafka, run } = require('./common')

const [topic, count, mode] = process.argv.slice(3)
const idempotent = mode === 'idempotent'

run(async () => {
  const producer = kafka('kafkajs-producer').producer(
    idempotent ? { idempotent: true, maxInFlightRequests: 1, retry: { retries: Number.MAX_SAFE_INTEGER } } : {}
  )
  await producer.connect()
  const sent = []
  for (let start = 0; start < Number(count); start += 100) {
    const messages = []
    for (let i = start; i < Math.min(start + 100, Number(count)); i++) {
      messages.push({ key: `key-${i}`, value: `value-${i}`, headers: { index: String(i), origin: 'kafkajs' } })
    }
    const results = await producer.send({ topic, acks: -1, compression: CompressionTypes.GZIP, messages })
    for (const r of results) sent.push({ partition: r.partition, baseOffset: r.baseOffset, errorCode: r.errorCode })
  }
  await producer.disconnect()
  return { sent }
})
