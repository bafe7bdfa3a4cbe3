// The no-op task of graphile-worker's own perf test (bench/all.sh).
module.exports = async (payload) => {
  if (payload.id === 999) {
    console.log("Found 999!");
  }
};
