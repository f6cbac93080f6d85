package shmem

const sysMemfdCreate = 385
