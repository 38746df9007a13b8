// kafkajs 2.2.4: alterPartitionReassignments / listPartitionReassignments (KIP-455)
// against a kref cluster. argv: brokers topic partition replicas(comma list).
// Moves the partition, lists while in progress, waits (bounded) until the list
// is empty. Prints one JSON line; tests/controller/test_reassignment_processes.py
// asserts on it.
const { Kafka, logLevel } = require('kafkajs')

const [brokersArg, topic, partitionArg, replicasArg] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'kref-kafkajs-reassign', brokers: brokersArg.split(','), logLevel: logLevel.NOTHING,
                          retry: { retries: 8, initialRetryTime: 200 } })

async function main () {
  const out = {}
  const admin = kafka.admin()
  await admin.connect()
  const partition = Number(partitionArg)
  const replicas = replicasArg.split(',').map(Number)
  await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition, replicas }] }], timeout: 10000 })
  const first = await admin.listPartitionReassignments({ topics: [{ topic, partitions: [partition] }], timeout: 10000 })
  out.first = first.topics.flatMap(t => t.partitions.map(p => ({ topic: t.topic, partition: p.partition,
    replicas: p.replicas, adding: p.addingReplicas, removing: p.removingReplicas })))
  const t0 = Date.now()
  let ongoing = out.first.length
  while (ongoing > 0 && Date.now() - t0 < 40000) {
    await new Promise(resolve => setTimeout(resolve, 200))
    const listed = await admin.listPartitionReassignments({ timeout: 10000 })
    ongoing = listed.topics.reduce((n, t) => n + t.partitions.length, 0)
  }
  out.ongoing = ongoing
  try {
    await admin.alterPartitionReassignments({ topics: [{ topic, partitionAssignment: [{ partition, replicas: [] }] }], timeout: 10000 })
    out.empty = 'accepted'
  } catch (e) {
    out.empty = e.errors ? e.errors.map(x => x.type).join(',') : (e.type || e.name)
  }
  await admin.disconnect()
  console.log(JSON.stringify(out))
}

main().catch(e => { console.error(e); process.exit(1) })
