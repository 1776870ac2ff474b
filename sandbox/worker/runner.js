// The JavaScript side of a code-node job: runs as the sandbox job's process,
// after the worker has set its limits and installed its seccomp filter.
// Reads one length-prefixed JSON job ({code, inputs}) from fd 3, calls
// main(inputs) (awaiting it when it returns a promise) and writes one
// length-prefixed JSON result back to fd 3.
'use strict';
const fs = require('fs');
const vm = require('vm');

const CHANNEL_FD = 3;
const network = process.env.FIRSTGATE_NETWORK === '1';
const PROCESS_MODULES = new Set(['child_process', 'cluster', 'worker_threads']);
const NETWORK_MODULES = new Set(['net', 'http', 'https', 'http2', 'tls', 'dgram', 'dns', 'inspector']);
let violation = null;

// A clear error for what the kernel filter would refuse anyway.
class SandboxViolation extends Error {
  constructor(kind, what) {
    super(`${kind} access is not allowed in the sandbox (${what})`);
    this.name = 'SandboxViolation';
    violation = kind;
  }
}

function guardedRequire(name) {
  const bare = String(name).replace(/^node:/, '');
  if (PROCESS_MODULES.has(bare)) throw new SandboxViolation('process', bare);
  if (!network && NETWORK_MODULES.has(bare)) throw new SandboxViolation('network', bare);
  return require(name);
}

function readExact(size) {
  const buffer = Buffer.alloc(size);
  let offset = 0;
  while (offset < size) {
    const count = fs.readSync(CHANNEL_FD, buffer, offset, size - offset, null);
    if (count === 0) throw new Error('the job channel closed');
    offset += count;
  }
  return buffer;
}

function write(frame) {
  let text;
  try {
    text = JSON.stringify(frame);
  } catch (error) {
    text = JSON.stringify({ status: 'error', kind: 'not_json', detail: String(error.message).slice(0, 500) });
  }
  const body = Buffer.from(text === undefined ? 'null' : text, 'utf8');
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length, 0);
  const data = Buffer.concat([header, body]);
  let offset = 0;
  while (offset < data.length) offset += fs.writeSync(CHANNEL_FD, data, offset, data.length - offset);
}

function failure(error) {
  if (violation) return { status: 'error', kind: 'violation', operation: violation };
  if (error instanceof RangeError && /allocation failed/i.test(String(error.message))) {
    return { status: 'error', kind: 'memory' };
  }
  const stack = error && error.stack ? String(error.stack) : '';
  const where = /code\.js:(\d+)/.exec(stack);
  return {
    status: 'error',
    kind: 'exception',
    type: error && error.name ? String(error.name) : typeof error,
    message: String(error && error.message !== undefined ? error.message : error).slice(0, 2000),
    line: where ? Number(where[1]) : null,
  };
}

function finish(frame) {
  write(frame);
  process.exit(0); // never wait for timers the code left behind
}

async function run() {
  const job = JSON.parse(readExact(readExact(4).readUInt32BE(0)).toString('utf8'));
  globalThis.require = guardedRequire;
  if (!network) {
    globalThis.fetch = () => { throw new SandboxViolation('network', 'fetch'); };
    globalThis.WebSocket = undefined;
  }
  const main = vm.runInThisContext(`${job.code}\n;typeof main === 'function' ? main : undefined`, {
    filename: 'code.js',
  });
  if (typeof main !== 'function') return { status: 'error', kind: 'no_main' };
  let result = main(job.inputs);
  if (result && typeof result.then === 'function') result = await result;
  if (result === null || typeof result !== 'object' || Array.isArray(result)) {
    return { status: 'error', kind: 'not_dict', type: Array.isArray(result) ? 'array' : typeof result };
  }
  return { status: 'ok', result };
}

process.on('uncaughtException', (error) => finish(failure(error)));
run().then(finish, (error) => finish(failure(error)));
