package shmem

import "syscall"

const sysMemfdCreate = 385
const sysProcessVMReadv = syscall.SYS_PROCESS_VM_READV
