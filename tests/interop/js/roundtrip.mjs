// MQTT.js (the Node and browser client) against a broker: connect, subscribe, publish at QoS 0, 1
// and 2, twice to one topic (5.0: by topic alias the second time), a retained message that a
// later subscriber gets too, then leave, let a message queue for the persistent session, come
// back and receive it. Judging is left to the caller (tests/interop/test_mqttjs.py): this prints one
// JSON report of what the broker sent, every packet as MQTT.js decoded it.
//
//   node roundtrip.mjs PORT PROTOCOL_VERSION PREFIX      (PROTOCOL_VERSION 4 = 3.1.1, 5 = 5.0)
//
// MQTTJS_URL, when set, is the broker's URL instead (ws://127.0.0.1:8083/mqtt: MQTT over WebSocket).
//
// The exit status is 0 when every step completed, 1 when one failed (the report says which, and
// why) or nothing happened for TIMEOUT_MS: a broker that never answers must not hang the test.
import mqtt from 'mqtt'

const TIMEOUT_MS = 15000
const [port, protocolVersion, prefix] = [Number(process.argv[2]), Number(process.argv[3]), process.argv[4]]
const v5 = protocolVersion === 5
const url = process.env.MQTTJS_URL || `mqtt://127.0.0.1:${port}`

// What a 5.0 publisher attaches to each message; the broker must forward all of it unchanged
// (MQTT 5.0 section 3.3.2.3, docs/brokers.md#what-it-guarantees), the message expiry interval lowered by the time it waited.
const SENT_PROPERTIES = {
  userProperties: { origin: 'mqtt.js', tags: ['first', 'second'] },
  contentType: 'text/plain; charset=utf-8',
  payloadFormatIndicator: true,
  responseTopic: `${prefix}/reply`,
  correlationData: Buffer.from([0x00, 0x01, 0xfe, 0xff]),
  messageExpiryInterval: 3600,
}
const SUBSCRIPTION_ID = 7

const report = { protocolVersion, step: 'start', subscriber: [], publisher: [], late: [], published: [], error: null }

// A packet as JSON can hold it: Buffers (payload, correlation data) as text or hex.
function plain(packet) {
  const out = {}
  for (const [key, value] of Object.entries(packet)) {
    if (key === 'payload' && value != null) out.payload = Buffer.from(value).toString('utf8')
    else if (Buffer.isBuffer(value)) out[key] = value.toString('hex')
    else if (value && typeof value === 'object' && !Array.isArray(value)) out[key] = plain(value)
    else out[key] = value
  }
  return out
}

function finish(status) {
  process.stdout.write(JSON.stringify(report) + '\n', () => process.exit(status))
}

function fail(error) {
  report.error = { message: String(error && error.message ? error.message : error), code: error && error.code }
  finish(1)
}

const timer = setTimeout(() => fail(new Error(`no progress for ${TIMEOUT_MS} ms at step ${report.step}`)), TIMEOUT_MS)

// Connect and resolve with the CONNACK; every packet the client receives goes to `log`, which
// `arrived` watches (a PUBLISH may come in the same read as the CONNACK, before any listener
// added after the connect would see it).
function connect(clientId, clean, log, extra = {}) {
  const options = { protocolVersion, clientId, clean, reconnectPeriod: 0, connectTimeout: 5000, keepalive: 30, ...extra }
  if (v5 && !clean) options.properties = { sessionExpiryInterval: 300 }
  const client = mqtt.connect(url, options)
  client.on('packetreceive', (packet) => {
    log.push(plain(packet))
    for (const waiter of [...waiters]) waiter()
  })
  client.on('packetsend', (packet) => {
    sent.push(packet.cmd)
    for (const waiter of [...waiters]) waiter()
  })
  return new Promise((resolve, reject) => {
    client.once('connect', (connack) => resolve([client, connack]))
    client.once('error', reject)
    client.once('close', () => reject(new Error('connection closed before CONNACK')))
  })
}

const waiters = new Set()
const sent = [] // the commands of every packet either client wrote

// Resolve once `condition()` holds, checked after each packet in or out.
function until(condition) {
  return new Promise((resolve) => {
    const check = () => {
      if (condition()) {
        waiters.delete(check)
        resolve()
      }
    }
    waiters.add(check)
    check()
  })
}

const publishes = (log) => log.filter((packet) => packet.cmd === 'publish').length

async function main() {
  report.step = 'subscriber connects'
  let [subscriber] = await connect(`${prefix}-sub`, false, report.subscriber)
  report.step = 'subscribe'
  const subscribeOptions = { qos: 2 }
  if (v5) subscribeOptions.properties = { subscriptionIdentifier: SUBSCRIPTION_ID }
  await subscriber.subscribeAsync(`${prefix}/#`, subscribeOptions)

  report.step = 'publisher connects'
  // 5.0: MQTT.js gives each topic an alias within the broker's Topic Alias Maximum and sends the
  // alias alone from the second message on; the subscriber must see the topic every time.
  const [publisher] = await connect(`${prefix}-pub`, true, report.publisher, { autoAssignTopicAlias: v5 })
  publisher.on('packetsend', (packet) => {
    if (packet.cmd === 'publish') report.published.push(plain(packet))
  })
  for (const qos of [0, 1, 2]) {
    report.step = `publish QoS ${qos}`
    const options = { qos }
    if (v5) options.properties = SENT_PROPERTIES
    await publisher.publishAsync(`${prefix}/qos${qos}`, `héllo ✓ QoS ${qos}`, options)
  }
  report.step = 'receive QoS 0, 1, 2'
  await until(() => publishes(report.subscriber) === 3)
  // The QoS 2 delivery ends with the subscriber's PUBCOMP: leave only after it went out, or the
  // broker rightly sends the PUBREL again on return, which would blur what this run shows.
  await until(() => sent.includes('pubcomp'))

  report.step = 'publish twice to one topic'
  await publisher.publishAsync(`${prefix}/alias`, 'alias 1', { qos: 1 })
  await publisher.publishAsync(`${prefix}/alias`, 'alias 2', { qos: 1 })
  await until(() => publishes(report.subscriber) === 5)

  report.step = 'publish a retained message'
  await publisher.publishAsync(`${prefix}/retained`, 'kept', { qos: 1, retain: true })
  await until(() => publishes(report.subscriber) === 6)
  report.step = 'a later subscriber gets the retained message'
  const [late] = await connect(`${prefix}-late`, true, report.late)
  await late.subscribeAsync(`${prefix}/retained`, { qos: 1 })
  await until(() => publishes(report.late) === 1)
  await late.endAsync()

  report.step = 'subscriber leaves'
  await subscriber.endAsync()
  report.step = 'publish to the offline session'
  await publisher.publishAsync(`${prefix}/offline`, 'queued while away', { qos: 1 })
  report.step = 'subscriber comes back'
  let back
  ;[subscriber, back] = await connect(`${prefix}-sub`, false, report.subscriber)
  report.step = 'receive the queued message'
  if (!back.sessionPresent) throw new Error('the session was not kept: CONNACK session present is 0')
  await until(() => publishes(report.subscriber) === 7)

  report.step = 'unsubscribe'
  await subscriber.unsubscribeAsync(`${prefix}/#`)
  report.step = 'clear the retained message'
  await publisher.publishAsync(`${prefix}/retained`, '', { qos: 1, retain: true })
  report.step = 'disconnect'
  await Promise.all([subscriber.endAsync(), publisher.endAsync()])
  report.step = 'done'
  clearTimeout(timer)
  finish(0)
}

main().catch(fail)
