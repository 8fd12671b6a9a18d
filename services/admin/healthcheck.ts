// The containers' health check (docker-compose.yml): the runtime image has
// node but no curl or wget. GETs the URL given and exits 0 on a 2xx answer;
// 1 on any other answer, on none, or after 2 s, naming why on stderr.
//   node dist/services/admin/healthcheck.js http://127.0.0.1:8080/readyz
const TIMEOUT_MS = 2_000;

const url = process.argv[2];
if (!url || !URL.canParse(url)) {
  console.error("usage: node dist/services/admin/healthcheck.js <http URL>");
  process.exit(2);
}
try {
  const res = await fetch(url, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  if (!res.ok) console.error(`${url} answered ${res.status}`);
  process.exitCode = res.ok ? 0 : 1;
} catch (err) {
  console.error(`${url}: ${(err as Error).message}`);
  process.exitCode = 1;
}
