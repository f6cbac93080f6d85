package shm

const sysMemfdCreate = 385
