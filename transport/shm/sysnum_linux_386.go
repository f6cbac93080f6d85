package shm

const sysMemfdCreate = 356
