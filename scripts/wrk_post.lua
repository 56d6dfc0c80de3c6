-- wrk script for scripts/bench.py: POST the bytes of the file $WRK_BODY_FILE as every request's
-- body (headers come from wrk's -H), and print one JSON line of totals and latency percentiles
-- at the end. A response that is not 2xx counts as an error.
local file = assert(io.open(os.getenv("WRK_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "errors": %d, "p50_us": %d, "p99_us": %d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
