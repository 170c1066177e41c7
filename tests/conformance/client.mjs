// SPDX-License-Identifier: BSD-2-Clause
// The client of `make conformance`: the cache test suite's own runner (what its `npm run cli`
// runs), pointed at cacheparty.
//
// Usage: node client.mjs SUITE_DIR CACHE_URL ORIGIN_URL RESULTS_JSON GROUPS_JSON [TEST_ID]
//   SUITE_DIR     the installed http-cache-tests package
//   CACHE_URL     cacheparty, e.g. http://127.0.0.1:PORT (no trailing slash)
//   ORIGIN_URL    the suite's server, e.g. http://127.0.0.1:PORT
//   RESULTS_JSON  written with the suite's results, as its CLI prints them: test id -> true, or
//                 [error kind, message] ("Assertion" for a failed check, "Setup" for a failed setup)
//   GROUPS_JSON   written with the suite's grouping: [{id, name, tests: [{id, name, kind,
//                 depends_on}]}], the tests that run outside a browser only
//   TEST_ID       run that one test and print the requests and answers on both sides, as
//                 `npm run cli --id=TEST_ID` does
//
// One difference from the suite's CLI: its control requests (PUT /config/UUID before a test,
// GET /state/UUID after it) go straight to the origin. The suite sends them through the cache
// under test so that a plain reverse proxy needs no setup, but cacheparty answers only GET and
// HEAD (PUT gets 405): through it every test would fail its setup. The requests under test,
// /test/UUID, all go through cacheparty. Each request gets a 20 s timeout (node-fetch's own
// option) so that one hung answer fails its test instead of stalling the run.

import fs from 'fs'
import path from 'path'
import { createRequire } from 'module'
import { pathToFileURL } from 'url'

const [suiteDir, cacheUrl, originUrl, resultsPath, groupsPath, testId] = process.argv.slice(2)
if (!suiteDir || !cacheUrl || !originUrl || !resultsPath || !groupsPath) {
  console.error('usage: node client.mjs SUITE_DIR CACHE_URL ORIGIN_URL RESULTS_JSON GROUPS_JSON [TEST_ID]')
  process.exit(2)
}

const suite = file => import(pathToFileURL(path.join(suiteDir, file)).href)
const fetch = createRequire(path.join(suiteDir, 'package.json'))('node-fetch')
const { runTests, getResults } = await suite('client/runner.mjs')
const tests = (await suite('tests/index.mjs')).default
tests.push((await suite('tests/surrogate-control.mjs')).default)

const controlPrefixes = ['/config/', '/state/'].map(p => cacheUrl + p)
function routedFetch (url, init = {}) {
  if (controlPrefixes.some(p => url.startsWith(p))) url = originUrl + url.slice(cacheUrl.length)
  return fetch(url, { timeout: 20000, ...init })
}

let toRun = tests
if (testId) {
  toRun = []
  for (const s of tests) {
    for (const t of s.tests) {
      if (t.id === testId) {
        t.dump = true
        toRun.push({ id: s.id, name: s.name, description: s.description, tests: [t] })
      }
    }
  }
  if (toRun.length === 0) {
    console.error(`no test ${testId} in the suite`)
    process.exit(2)
  }
}

const groups = toRun.map(s => ({
  id: s.id,
  name: s.name,
  tests: s.tests.filter(t => t.browser_only !== true).map(t => ({
    id: t.id, name: t.name, kind: t.kind || 'required', depends_on: t.depends_on || []
  }))
}))

await runTests(toRun, routedFetch, false, cacheUrl)
fs.writeFileSync(resultsPath, JSON.stringify(getResults(), null, 2) + '\n')
fs.writeFileSync(groupsPath, JSON.stringify(groups, null, 2) + '\n')
if (testId) console.log(`result of ${testId}: ${JSON.stringify(getResults()[testId])}`)
