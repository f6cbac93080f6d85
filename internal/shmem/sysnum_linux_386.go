package shmem

const sysMemfdCreate = 356
