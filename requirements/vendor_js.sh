#!/usr/bin/env bash
# Bring the report's chart library into the package, from its pinned npm release:
#
#   bash requirements/vendor_js.sh            # npm pack uplot@<version in VENDOR.json>, check, copy
#
# gtpo-report inlines uPlot into every page it writes, so the page opens with no network; the
# files ship inside the package (gtpo_verl/tools/report/assets/), where a cluster with no
# registry access still finds them. The tarball must match the npm integrity recorded in
# VENDOR.json; the copied files' sha256 are written back there (tests/tools/test_report_assets_on_cpu.py
# checks them). To move to another release, edit "version" and "integrity" (npm view uplot@X dist.integrity).
set -euo pipefail
cd "$(dirname "$0")/.."
assets=gtpo_verl/tools/report/assets
pin="${assets}/VENDOR.json"
version=$(python3 -c "import json; print(json.load(open('${pin}'))['version'])")
integrity=$(python3 -c "import json; print(json.load(open('${pin}'))['integrity'])")
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
(cd "${work}" && npm pack --silent "uplot@${version}" >/dev/null)
tarball="${work}/uplot-${version}.tgz"
got="sha512-$(openssl dgst -sha512 -binary "${tarball}" | base64 -w0)"
if [ "${got}" != "${integrity}" ]; then
    echo "uplot@${version}: the tarball's integrity ${got} is not the pinned ${integrity}" >&2
    exit 1
fi
tar -xzf "${tarball}" -C "${work}"
cp "${work}/package/dist/uPlot.iife.min.js" "${work}/package/dist/uPlot.min.css" "${assets}/"
cp "${work}/package/LICENSE" "${assets}/uPlot.LICENSE"
python3 - "${pin}" <<'PY'
import hashlib, json, pathlib, sys
pin = pathlib.Path(sys.argv[1])
data = json.loads(pin.read_text())
data["files"] = {name: hashlib.sha256((pin.parent / name).read_bytes()).hexdigest()
                 for name in ("uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE")}
pin.write_text(json.dumps(data, indent=1) + "\n")
PY
echo "vendored uplot@${version} into ${assets}"
