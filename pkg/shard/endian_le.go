//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package shard

// littleEndian says multi-byte loads read the low byte first, which lets
// a three-byte column id be read with one four-byte load (see id24).
const littleEndian = true
