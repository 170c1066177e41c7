#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""dns.py: the benchmark's DNS stub (Python 3 standard library only).

Answers every A query with 127.0.0.1 (TTL 300) and every other query type with an empty NOERROR
answer, over UDP and TCP on a loopback address. Writes the port it bound to PORTFILE, so the
harness can start it on an ephemeral port. Exits on SIGTERM/SIGINT or after --lifetime seconds.

usage: dns.py [--listen 127.0.0.1] [--port 0] [--portfile FILE] [--answer 127.0.0.1]
              [--lifetime 3600] [--log FILE]
"""
import argparse
import errno
import ipaddress
import os
import selectors
import signal
import socket
import struct
import sys
import time


def build_answer(query: bytes, answer_ip: bytes):
    """Returns the response to <query>, or None when it is not a parseable query."""
    if len(query) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qdcount != 1:
        return None
    pos = 12
    labels = []
    while True:
        if pos >= len(query):
            return None
        n = query[pos]
        pos += 1
        if n == 0:
            break
        if n & 0xC0 or pos + n > len(query):
            return None
        labels.append(query[pos:pos + n].decode("ascii", "replace"))
        pos += n
    if pos + 4 > len(query):
        return None
    qtype, qclass = struct.unpack("!HH", query[pos:pos + 4])
    question = query[12:pos + 4]
    rd = flags & 0x0100
    ancount = 1 if qtype == 1 and qclass == 1 else 0
    header = struct.pack("!HHHHHH", qid, 0x8000 | 0x0400 | rd | 0x0080, 1, ancount, 0, 0)
    body = question
    if ancount:
        body += struct.pack("!HHHIH", 0xC00C, 1, 1, 300, 4) + answer_ip
    return header + body, ".".join(labels), qtype


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--portfile")
    ap.add_argument("--answer", default="127.0.0.1")
    ap.add_argument("--lifetime", type=float, default=3600)
    ap.add_argument("--log")
    args = ap.parse_args()
    if not ipaddress.ip_address(args.listen).is_loopback:
        sys.exit("dns.py: refusing to listen on a non-loopback address")
    answer_ip = ipaddress.IPv4Address(args.answer).packed
    log = open(args.log, "a", buffering=1) if args.log else None

    # UDP and TCP on one port: an ephemeral UDP port may be taken for TCP (a connection's local
    # port), so try again with another one (bounded).
    for attempt in range(100):
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((args.listen, args.port))
        port = udp.getsockname()[1]
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((args.listen, port))
            break
        except OSError as e:
            udp.close()
            tcp.close()
            if args.port != 0 or e.errno != errno.EADDRINUSE or attempt == 99:
                raise
    tcp.listen(64)
    if args.portfile:
        tmp = args.portfile + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, args.portfile)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    sel = selectors.DefaultSelector()
    sel.register(udp, selectors.EVENT_READ, "udp")
    sel.register(tcp, selectors.EVENT_READ, "listen")
    buffers = {}
    deadline = time.monotonic() + args.lifetime
    queries = 0
    while not stop and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            sock = key.fileobj
            if key.data == "udp":
                try:
                    data, peer = udp.recvfrom(4096)
                except OSError:
                    continue
                res = build_answer(data, answer_ip)
                if res:
                    udp.sendto(res[0], peer)
                    queries += 1
                    if log:
                        log.write("udp %s type=%d\n" % (res[1], res[2]))
            elif key.data == "listen":
                try:
                    conn, _ = tcp.accept()
                except OSError:
                    continue
                conn.setblocking(False)
                buffers[conn] = b""
                sel.register(conn, selectors.EVENT_READ, "tcp")
            else:
                try:
                    chunk = sock.recv(4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    sel.unregister(sock)
                    buffers.pop(sock, None)
                    sock.close()
                    continue
                buf = buffers[sock] + chunk
                while len(buf) >= 2:
                    n = struct.unpack("!H", buf[:2])[0]
                    if len(buf) < 2 + n:
                        break
                    res = build_answer(buf[2:2 + n], answer_ip)
                    buf = buf[2 + n:]
                    if res:
                        try:
                            sock.sendall(struct.pack("!H", len(res[0])) + res[0])
                        except OSError:
                            break
                        queries += 1
                        if log:
                            log.write("tcp %s type=%d\n" % (res[1], res[2]))
                buffers[sock] = buf
    if log:
        log.write("queries %d\n" % queries)


if __name__ == "__main__":
    main()
