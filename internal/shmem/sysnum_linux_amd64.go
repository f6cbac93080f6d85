package shmem

const sysMemfdCreate = 319
