package shmem

const sysMemfdCreate = 319
const sysProcessVMReadv = 310
