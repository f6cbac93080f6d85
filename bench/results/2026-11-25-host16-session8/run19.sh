#!/bin/bash
# session 8: host.sh with the push build, 3 rounds
cd "$(dirname "$0")"
HOST_INSTALL=0 HOST_MAX_WORKERS=8 HOST_ROUNDS=3 timeout 540 bash ./host.sh . $OUT/host > $OUT/host.log 2>&1
tar czf $OUT/out19.tgz -C $OUT host host.log 2>/dev/null
