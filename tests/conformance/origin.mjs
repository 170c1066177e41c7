// SPDX-License-Identifier: BSD-2-Clause
// The origin of `make conformance`: the cache test suite's own server, bound to 127.0.0.1 only.
//
// Usage: node origin.mjs SUITE_DIR PORT PIDFILE
//   SUITE_DIR  the installed http-cache-tests package (build/conformance/suite/node_modules/...)
//   PORT       the loopback port to listen on
//   PIDFILE    where the suite's server writes its process id
//
// The suite's server listens on every interface of its configured port. Its listen() is wrapped
// here to add the host 127.0.0.1, then the server module is loaded unchanged; it reads its port,
// protocol and pid file from the npm_config_* variables that `npm run server` would set.

import net from 'net'
import path from 'path'
import { pathToFileURL } from 'url'

const [suiteDir, port, pidfile] = process.argv.slice(2)
if (!suiteDir || !port || !pidfile) {
  console.error('usage: node origin.mjs SUITE_DIR PORT PIDFILE')
  process.exit(2)
}

const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (p, ...rest) {
  if (typeof p === 'number' || typeof p === 'string') {
    return listen.call(this, Number(p), '127.0.0.1', ...rest.filter(a => typeof a === 'function'))
  }
  return listen.call(this, p, ...rest)
}

process.env.npm_config_protocol = 'http'
process.env.npm_config_port = port
process.env.npm_config_pidfile = pidfile
process.on('SIGTERM', () => process.exit(0))

await import(pathToFileURL(path.join(suiteDir, 'server', 'server.mjs')).href)
