//go:build linux && (arm64 || loong64 || mips64 || mips64le || riscv64 || s390x)

package shmem

import "syscall"

const sysMemfdCreate = syscall.SYS_MEMFD_CREATE
const sysProcessVMReadv = syscall.SYS_PROCESS_VM_READV
