package transport

import "syscall"

// quickAck asks the kernel to acknowledge what fd has received now rather
// than with its delayed ACK (up to 40 ms on Linux).
func quickAck(fd uintptr) {
	_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
}
