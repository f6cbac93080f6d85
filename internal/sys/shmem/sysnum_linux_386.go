package shmem

const sysMemfdCreate = 356
const sysProcessVMReadv = 347
