// Package transport is what both sides of the coordinator-worker protocol
// over NATS share: the connection and its security options, the
// embedded server, the shard bucket, the protocol's timing and the count
// of messages dropped. The coordinator's side is package cluster, the
// worker's package worker; neither imports the other. The messages'
// bytes are package wire's.
package transport
