// Accounting from /proc: each process's CPU time (utime + stime) and
// resident memory, for the benchmark's CPU-per-request and peak-RSS columns,
// and the machine's idle time, for its idle column.
import { readFileSync, readdirSync } from "node:fs";
import { execSync } from "node:child_process";

const TICK_US = 1_000_000 / Number(execSync("getconf CLK_TCK").toString().trim() || 100);

/**
 * Microseconds of CPU the processes have used so far, their reaped children's
 * included: a PostgreSQL backend that exits moves its time into the
 * postmaster's, so a group's total never goes back.
 */
export function cpuMicros(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      // The command name may hold spaces; the fields after ") " are fixed
      // (utime, stime, cutime, cstime are fields 14 to 17 of proc(5)).
      const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
      ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    } catch {
      // gone
    }
  }
  return ticks * TICK_US;
}

/** The machine's CPU time so far, in ticks: all of it, and the idle part (idle and iowait, proc(5)). */
export function machineTicks(): { total: number; idle: number } {
  const fields = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  // guest and guest_nice are counted inside user and nice already.
  const total = fields.slice(0, 8).reduce((sum, n) => sum + n, 0);
  return { total, idle: fields[3]! + fields[4]! };
}

/** Resident set size in bytes, summed over the processes. */
export function rssBytes(pids: number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      const match = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      kb += Number(match?.[1] ?? 0);
    } catch {
      // gone
    }
  }
  return kb * 1024;
}

export function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
      readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number),
    );
  } catch {
    return [];
  }
}

export function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

/** The PostgreSQL server's processes: the postmaster and every backend and worker under it. */
export function postgresPids(dataDirectory: string): () => number[] {
  const postmaster = Number(readFileSync(`${dataDirectory}/postmaster.pid`, "utf8").split("\n")[0]);
  // Backends come and go with connections: look again at each sample.
  return () => [postmaster, ...childrenOf(postmaster)];
}
