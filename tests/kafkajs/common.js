// Shared by the scripts that tests/test_kafkajs.py runs: a client for argv[2] (host:port), JSON out.
'use strict'
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const { Kafka, logLevel } = require('kafkajs')

function kafka (clientId) {
  return new Kafka({
    clientId,
    brokers: [process.argv[2]],
    logLevel: logLevel.WARN,
    retry: { retries: 8, initialRetryTime: 100 },
    connectionTimeout: 5000,
    requestTimeout: 15000
  })
}

// Run `main`, print its result as one JSON line; any error exits 1 with the error on stderr.
function run (main) {
  main().then(
    result => { process.stdout.write(JSON.stringify(result) + '\n'); process.exit(0) },
    error => { console.error(error && error.stack ? error.stack : error); process.exit(1) }
  )
}

module.exports = { kafka, run }
