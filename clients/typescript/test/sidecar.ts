// The sidecar these tests talk to: SHORTTERM_TEST_URL (and SHORTTERM_TEST_TOKEN) when set (the
// Python suite sets them with a token; `npm test`, see run.ts, sets the URL of the one it
// started), else a `shortterm serve` this process starts on a free loopback port with a
// temporary SQLite file and no token (loopback needs none): a test file run on its own. Without
// either, the tests that need a sidecar skip with the reason.

import { spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { createInterface } from "node:readline";

export interface Sidecar {
  url: string;
  token: string | undefined;
  /** Stops the sidecar this process started (nothing for one given by URL). */
  close(): Promise<void>;
}

const STARTUP_MS = 60_000; // generous: a loaded CI machine imports slowly

/** The `shortterm` executable on PATH, or undefined. */
export function findShortterm(): string | undefined {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, process.platform === "win32" ? "shortterm.exe" : "shortterm");
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here: try the next directory
    }
  }
  return undefined;
}

/** Why there is no sidecar to test against, or "" when there is one. */
export function missingSidecar(): string {
  if (process.env.SHORTTERM_TEST_URL || findShortterm() !== undefined) return "";
  const how = "put `shortterm` on PATH (pip install -e '.[sidecar]'), or set SHORTTERM_TEST_URL";
  return `no sidecar: ${how}`;
}

export async function startSidecar(): Promise<Sidecar> {
  const given = process.env.SHORTTERM_TEST_URL;
  if (given) {
    const token = process.env.SHORTTERM_TEST_TOKEN || undefined;
    return { url: given.replace(/\/+$/, ""), token, close: async () => {} };
  }
  return spawnSidecar();
}

/** A `shortterm serve` of this process's own; with `token`, every /v1 route needs it. */
export async function spawnSidecar(token?: string): Promise<Sidecar> {
  const executable = findShortterm();
  if (executable === undefined) throw new Error(missingSidecar());
  const dir = mkdtempSync(join(tmpdir(), "shortterm-client-test-"));
  // The sidecar's settings come from its arguments alone, not from this shell's SHORTTERM_*.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("SHORTTERM_")),
  );
  if (token !== undefined) env.SHORTTERM_TOKEN = token;
  const store = `sqlite:///${join(dir, "sidecar.db")}`;
  const child = spawn(
    executable,
    ["serve", "--host", "127.0.0.1", "--port", "0", "--store", store, "--cache", "memory://"],
    { env, stdio: ["ignore", "ignore", "pipe"] },
  );
  const orphan = (): void => void child.kill(); // this process ends without its after hook
  process.once("exit", orphan);
  const stop = async (): Promise<void> => {
    process.removeListener("exit", orphan);
    await terminate(child);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const url = await listeningUrl(child);
    return { url, token, close: stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** The URL the sidecar prints once it listens; its log is kept for the error otherwise. */
function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    const seen: string[] = [];
    const lines = createInterface({ input: child.stderr! });
    const fail = (why: string): void => {
      clearTimeout(timer);
      reject(new Error(`the sidecar did not start (${why}):\n${seen.join("\n")}`));
    };
    const timer = setTimeout(() => fail(`no address within ${STARTUP_MS} ms`), STARTUP_MS);
    lines.on("line", (line) => {
      seen.push(line);
      const found = /^shortterm sidecar listening on (\S+)/.exec(line);
      if (found !== null) {
        clearTimeout(timer);
        child.stderr!.resume(); // keep draining its log so a full pipe never blocks it
        resolve(found[1]!);
      }
    });
    child.once("error", (error) => fail(error.message));
    child.once("exit", (code) => fail(`it exited with ${code}`));
  });
}

async function terminate(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
  await exited;
  clearTimeout(killer);
}
