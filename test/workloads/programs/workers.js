// workers.js counts the primes below LIMIT on WORKERS worker threads, each
// taking every WORKERS-th candidate, and prints each worker's count and the
// total: a known answer (9592 primes below 100,000).
'use strict';
const { Worker, isMainThread, parentPort, workerData } = require('node:worker_threads');

const LIMIT = 100000;
const WORKERS = 4;

function isPrime(n) {
  if (n < 2) return false;
  for (let d = 2; d * d <= n; d++) {
    if (n % d === 0) return false;
  }
  return true;
}

if (isMainThread) {
  const counts = new Array(WORKERS);
  let done = 0;
  for (let w = 0; w < WORKERS; w++) {
    const worker = new Worker(__filename, { workerData: w });
    worker.on('message', (n) => {
      counts[w] = n;
      if (++done === WORKERS) {
        counts.forEach((c, i) => console.log(`worker ${i}: ${c}`));
        console.log(`primes below ${LIMIT}: ${counts.reduce((a, b) => a + b, 0)}`);
      }
    });
    worker.on('error', (e) => {
      console.error(`worker ${w}: ${e}`);
      process.exitCode = 1;
    });
  }
} else {
  let n = 0;
  for (let c = workerData; c < LIMIT; c += WORKERS) {
    if (isPrime(c)) n++;
  }
  parentPort.postMessage(n);
}
