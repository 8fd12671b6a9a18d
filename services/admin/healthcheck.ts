// The containers' health check (docker-compose.yml): the runtime image has
// node but no curl or wget. GETs the URL given and exits 0 on a 2xx answer;
// 1 on any other answer, on none, after 2 s, or without a URL, naming why on
// stderr (Docker reserves the other codes).
//   node dist/services/admin/healthcheck.js http://127.0.0.1:8080/readyz
const TIMEOUT_MS = 2_000;

const url = process.argv[2];
if (!url || !URL.canParse(url)) {
  console.error("usage: node dist/services/admin/healthcheck.js <http URL>");
  process.exit(1);
}
try {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  if (!res.ok) console.error(`${url} answered ${res.status}`);
  process.exitCode = res.ok ? 0 : 1;
} catch (err) {
  console.error(`${url}: ${(err as Error).message}`);
  process.exitCode = 1;
}
