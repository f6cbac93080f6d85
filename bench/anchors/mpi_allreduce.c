/*
 * Open MPI anchor for chorus's CPU allreduce: MPI_Allreduce of float32 SUM,
 * sizes 1 KB to 64 MB in steps of 4x.
 *
 * Build: mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 * Run:   mpirun -np 2 ./mpi_allreduce [target-seconds-per-rep] [reps]
 *        (defaults 0.2 s and 3)
 *
 * Per size: warm-up calls, a short calibration (max over ranks) that picks
 * the number of timed calls so that one rep takes about target seconds, then
 * reps times: MPI_Barrier, the timed calls, each rank timing with MPI_Wtime,
 * time = max over ranks of the average time per call. Reported time = the
 * median of the reps (this machine is noisy; stderr lists every rep).
 * Inputs are rank dependent (rank+1 + i%13, exact in float32); the output of
 * the last timed call is compared with the expected sum on every rank and the
 * wrong elements are summed over ranks.
 * Rank 0 prints one JSON object per line on stdout.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define MIN_BYTES (1L << 10)
#ifndef MAX_BYTES /* -DMAX_BYTES='(256L << 20)' for larger sweeps */
#define MAX_BYTES (64L << 20)
#endif

static double timed(const float *in, float *out, int count, long iters) {
    double t0 = MPI_Wtime();
    for (long k = 0; k < iters; k++)
        MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return (MPI_Wtime() - t0) / (double)iters;
}

static double max_over_ranks(double v) {
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    double target = argc > 1 ? atof(argv[1]) : 0.2;
    if (target <= 0) target = 0.2;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (reps < 1) reps = 1;
    if (reps > 99) reps = 99;
    double rt[99];

    float *in = malloc(MAX_BYTES), *out = malloc(MAX_BYTES);
    if (!in || !out) {
        fprintf(stderr, "mpi_allreduce: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long b = MIN_BYTES; b <= MAX_BYTES; b *= 4) {
        int count = (int)(b / sizeof(float));
        for (int i = 0; i < count; i++) {
            in[i] = (float)(rank + 1 + i % 13);
            out[i] = -1.0f;
        }
        /* warm-up, then calibration: about 1% of the target, at least 2 calls */
        MPI_Barrier(MPI_COMM_WORLD);
        timed(in, out, count, 5);
        MPI_Barrier(MPI_COMM_WORLD);
        double probe = max_over_ranks(timed(in, out, count, 3));
        long iters = (long)ceil(target / (probe > 0 ? probe : 1e-9));
        if (iters < 5) iters = 5;
        if (iters > 2000000) iters = 2000000;

        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < count; i++) out[i] = -1.0f;
            MPI_Barrier(MPI_COMM_WORLD);
            rt[r] = max_over_ranks(timed(in, out, count, iters));
        }
        double sorted[99];
        for (int r = 0; r < reps; r++) {  /* insertion sort, reps is tiny */
            int j = r;
            while (j > 0 && sorted[j - 1] > rt[r]) { sorted[j] = sorted[j - 1]; j--; }
            sorted[j] = rt[r];
        }
        double t = reps % 2 ? sorted[reps / 2] : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;

        long wrong = 0, total = 0;
        float base = (float)(n * (n + 1) / 2);
        for (int i = 0; i < count; i++)
            if (out[i] != base + (float)(n * (i % 13))) wrong++;
        MPI_Reduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);

        if (rank == 0) {
            double us = t * 1e6;
            double alg = (double)b / t / 1e9;
            double bus = alg * 2.0 * (n - 1) / n;
            printf("{\"bench\":\"allreduce\",\"backend\":\"openmpi\",\"session\":\"process\","
                   "\"workers\":%d,\"dtype\":\"float32\",\"bytes\":%ld,\"time_us\":%.3f,"
                   "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%ld}\n",
                   n, b, us, alg, bus, total);
            fflush(stdout);
            fprintf(stderr, "openmpi: %ld bytes: %d reps x %ld calls, us/call:", b, reps, iters);
            for (int r = 0; r < reps; r++) fprintf(stderr, " %.3f", rt[r] * 1e6);
            fprintf(stderr, "\n");
        }
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
