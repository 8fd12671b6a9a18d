// The V8 flags every process of ours runs with in production: `npm start`
// passes these, and package.json's start:* scripts and the Dockerfile's
// ENTRYPOINT spell out the same (test/signals.test.ts holds them equal).
// - The old generation held to 128 MB and the young one at 16 MB semi-spaces:
//   RSS under load stays near 130 MB instead of passing 170. Semi-spaces of
//   8 MB saved 15 MB more but cost the gateway about 10 % more CPU per
//   request in scavenges.
// - No allocation-site pretenuring: in about one run in four (5 of 13 runs
//   of gets), the gateway's scavenges went on promoting 1.6–3 MB each
//   instead of 150 KB, and it spent 20–30 % more CPU per request; V8 had
//   started allocating some sites straight into the old generation, whose
//   dead objects keep young garbage alive through scavenges. Without
//   pretenuring, 0 of 13 runs did.
// (README, Performance.)
export const NODE_FLAGS = ["--max-semi-space-size=16", "--max-old-space-size=128", "--no-allocation-site-pretenuring"];
