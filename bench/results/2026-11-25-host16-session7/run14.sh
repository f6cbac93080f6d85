#!/bin/bash
# session 7 final: host.sh with HOST_ROUNDS=3 (medians of 3 interleaved chorus rounds), new binary (92226aa+)
cd "$(dirname "$0")"
HOST_INSTALL=0 HOST_MAX_WORKERS=8 HOST_ROUNDS=3 bash ./host.sh . $OUT/host > $OUT/host.log 2>&1
sed -n '/Session round trip/,$p' $OUT/host/host.md | head -70
cd $OUT && tar czf host.tgz host host.log && rm -rf host
