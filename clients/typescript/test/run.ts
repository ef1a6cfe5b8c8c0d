// `npm test`: every compiled test file under Node's test runner, sharing one sidecar. When
// SHORTTERM_TEST_URL is not set and `shortterm` is on PATH, this starts `shortterm serve` (see
// sidecar.ts) and hands its URL to the test files as SHORTTERM_TEST_URL, so a test file only
// has to read that variable. Arguments go to `node --test` (e.g. `npm test --
// --test-reporter=spec`).

import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { missingSidecar, startSidecar, type Sidecar } from "./sidecar.js";

const here = dirname(fileURLToPath(import.meta.url));
const files = readdirSync(here)
  .filter((name) => name.endsWith(".test.js"))
  .sort()
  .map((name) => join(here, name));

let sidecar: Sidecar | undefined;
const env = { ...process.env };
if (!process.env.SHORTTERM_TEST_URL) {
  const missing = missingSidecar();
  if (missing) {
    console.warn(`# ${missing}: the tests that need one skip`);
  } else {
    sidecar = await startSidecar();
    env.SHORTTERM_TEST_URL = sidecar.url;
    delete env.SHORTTERM_TEST_TOKEN; // this sidecar has none: loopback needs none
  }
}

const tests = spawn(process.execPath, ["--test", ...process.argv.slice(2), ...files], {
  env,
  stdio: "inherit",
});
const stop = (): void => void tests.kill("SIGINT");
process.on("SIGINT", stop);
process.on("SIGTERM", stop);
const code = await new Promise<number>((resolve) => {
  tests.on("exit", (status, signal) => resolve(status ?? (signal === null ? 1 : 130)));
});
await sidecar?.close();
process.exit(code);
