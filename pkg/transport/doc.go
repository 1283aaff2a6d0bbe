// Package transport carries the coordinator-worker protocol over NATS:
// a worker (Worker) and the coordinator's side (Cluster), each a protocol
// core stepped by messages and ticks with a NATS loop around it, the
// connection, the embedded server, and the shard bucket. The messages'
// bytes are package wire's.
package transport
