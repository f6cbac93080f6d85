#!/bin/bash
# one interleaved round: old, new (process), Open MPI, old, new (threaded)
r=$1; out=/work/ab/out; mkdir -p $out
flock /work/bench.lock bash -c "
/work/ab/chorus-old bench allreduce --workers 2 --session process --min 1K --max 16K --json > $out/old-p-$r.txt 2>&1
/work/ab/chorus-new bench allreduce --workers 2 --session process --min 1K --max 16K --json > $out/new-p-$r.txt 2>&1
mpirun -np 2 --allow-run-as-root /work/ab/mpi_allreduce 0.1 3 > $out/mpi-$r.txt 2>&1
/work/ab/chorus-old bench allreduce --workers 2 --session threaded --min 1K --max 16K --json > $out/old-t-$r.txt 2>&1
/work/ab/chorus-new bench allreduce --workers 2 --session threaded --min 1K --max 16K --json > $out/new-t-$r.txt 2>&1
"
