// kafkajs 2.2.4 (a pure-JavaScript client, its own protocol code) against kref.
// Prints one JSON line with what it saw; tests/clients/test_kafkajs.py asserts on it.
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const broker = process.argv[2]
const kafka = new Kafka({ clientId: 'kref-kafkajs', brokers: [broker], logLevel: logLevel.NOTHING,
                          retry: { retries: 5, initialRetryTime: 100 } })
const TOPIC = 'kafkajs-topic'
const N = 300

async function main () {
  const out = {}
  const admin = kafka.admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 3 }] })

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  for (let i = 0; i < N; i += 50) {
    await producer.send({
      topic: TOPIC, acks: -1, compression: CompressionTypes.GZIP,
      messages: Array.from({ length: 50 }, (_, j) => ({ key: 'k' + ((i + j) % 7), value: 'v' + (i + j), headers: { h: 'x' } }))
    })
  }
  out.high = (await admin.fetchTopicOffsets(TOPIC)).map(o => Number(o.high))

  // a two-member group; both must join, all records consumed once, offsets committed
  const values = new Set()
  let headersOk = true
  const members = [0, 1].map(() => kafka.consumer({ groupId: 'kafkajs-group', sessionTimeout: 10000, heartbeatInterval: 500 }))
  for (const c of members) {
    await c.connect()
    await c.subscribe({ topic: TOPIC, fromBeginning: true })
    await c.run({ eachMessage: async ({ message }) => {
      values.add(message.value.toString())
      headersOk = headersOk && message.headers.h.toString() === 'x'
    } })
  }
  const t0 = Date.now()
  while (values.size < N && Date.now() - t0 < 30000) await new Promise(resolve => setTimeout(resolve, 100))
  out.consumed = values.size
  out.headersOk = headersOk
  for (const c of members) await c.disconnect()
  const committed = await admin.fetchOffsets({ groupId: 'kafkajs-group', topics: [TOPIC] })
  out.committed = committed[0].partitions.sort((a, b) => a.partition - b.partition).map(p => Number(p.offset))

  // transactions are refused with a fatal error, not retried until a timeout
  const tx = kafka.producer({ transactionalId: 'kafkajs-tx', idempotent: true, maxInFlightRequests: 1 })
  try {
    await tx.connect()
    const t = await tx.transaction()
    await t.send({ topic: TOPIC, messages: [{ value: 'tx' }] })
    await t.commit()
    out.transaction = 'committed'
  } catch (e) {
    out.transaction = e.name
  }
  await tx.disconnect()
  await producer.disconnect()
  await admin.disconnect()
  console.log(JSON.stringify(out))
}

main().catch(e => { console.error(e); process.exit(1) })
