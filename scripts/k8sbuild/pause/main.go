// Command pause is the pod sandbox's process: it holds the pod's
// namespaces open, reaps the children it inherits, and exits on SIGINT or
// SIGTERM. Built static, it is the whole of the sandbox image, since no
// registry is reachable to pull the usual one from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
