// kafkajs 2.2.4 against a 3-node `kref cluster`: DescribeCluster, a topic with
// replication factor 3, its partitions' replicas and isr, acks=-1 produce, a
// two-member consumer group, committed offsets. Prints one JSON line;
// tests/controller/test_cluster_async_clients.py asserts on it.
const { Kafka, logLevel } = require('kafkajs')

const brokers = process.argv[2].split(',')
const kafka = new Kafka({ clientId: 'kref-kafkajs-cluster', brokers, logLevel: logLevel.NOTHING,
                          retry: { retries: 8, initialRetryTime: 200 } })
const TOPIC = 'kafkajs-replicated'
const N = 90

async function main () {
  const out = {}
  const admin = kafka.admin()
  await admin.connect()
  const cluster = await admin.describeCluster()
  out.brokers = cluster.brokers.map(b => b.nodeId).sort()
  out.controller = cluster.controller
  out.created = await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 3, replicationFactor: 3 }], waitForLeaders: true })
  // Every broker applies the metadata log on its own, so a broker other than
  // the one that forwarded CreateTopics may not know the topic for a few ms
  // (Kafka has the same window). kafkajs retries only LEADER_NOT_AVAILABLE
  // here, so a user retries UNKNOWN_TOPIC_OR_PARTITION itself: bounded, 10 s.
  let metadata
  for (let attempt = 0; ; attempt++) {
    try {
      metadata = await admin.fetchTopicMetadata({ topics: [TOPIC] })
      break
    } catch (e) {
      if (e.type !== 'UNKNOWN_TOPIC_OR_PARTITION' || attempt >= 50) throw e
      await new Promise(resolve => setTimeout(resolve, 200))
    }
  }
  out.partitions = metadata.topics[0].partitions.sort((a, b) => a.partitionId - b.partitionId)
    .map(p => ({ leader: p.leader, replicas: p.replicas.slice().sort(), isr: p.isr.slice().sort() }))

  const producer = kafka.producer()
  await producer.connect()
  for (let i = 0; i < N; i += 30) {
    await producer.send({ topic: TOPIC, acks: -1, messages: Array.from({ length: 30 }, (_, j) => ({ key: 'k' + ((i + j) % 5), value: 'v' + (i + j) })) })
  }
  out.high = (await admin.fetchTopicOffsets(TOPIC)).map(o => Number(o.high))

  const values = new Set()
  const members = [0, 1].map(() => kafka.consumer({ groupId: 'kafkajs-cluster-group', sessionTimeout: 10000, heartbeatInterval: 500 }))
  for (const c of members) {
    await c.connect()
    await c.subscribe({ topic: TOPIC, fromBeginning: true })
    await c.run({ eachMessage: async ({ message }) => { values.add(message.value.toString()) } })
  }
  const t0 = Date.now()
  while (values.size < N && Date.now() - t0 < 40000) await new Promise(resolve => setTimeout(resolve, 100))
  out.consumed = values.size
  for (const c of members) await c.disconnect()
  const committed = await admin.fetchOffsets({ groupId: 'kafkajs-cluster-group', topics: [TOPIC] })
  out.committed = committed[0].partitions.sort((a, b) => a.partition - b.partition).map(p => Number(p.offset))
  await producer.disconnect()
  await admin.disconnect()
  console.log(JSON.stringify(out))
}

main().catch(e => { console.error(e); process.exit(1) })
