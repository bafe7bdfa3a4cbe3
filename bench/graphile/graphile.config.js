// graphile-worker's perf-test settings (its perfTest/graphile.config.js and
// perfTest/run.js: 24 concurrent jobs per process, a pool of 25, a local
// queue of 500 jobs refetched after 10 ms, completions batched with no
// delay), for bench/all.sh. The connection comes from DATABASE_URL.
module.exports = {
  worker: {
    concurrentJobs: 24,
    maxPoolSize: 25,
    fileExtensions: [".js"],
    gracefulShutdownAbortTimeout: 2500,
    localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
    completeJobBatchDelay: 0,
    failJobBatchDelay: 0,
  },
};
