"""The report's shipped chart library is the pinned npm release, byte for byte, and every page
inlines it under a Content-Security-Policy that admits only its own scripts."""

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from importlib import resources

from support.paths import FIXTURES, REPO_ROOT

from gtpo_verl.tools.report import write_report

ASSETS = resources.files("gtpo_verl.tools.report").joinpath("assets")


def test_vendored_uplot_matches_its_pin():
    pin = json.loads(ASSETS.joinpath("VENDOR.json").read_text())
    assert (pin["package"], pin["registry"], pin["license"]) == ("uplot", "npm", "MIT")
    assert pin["integrity"].startswith("sha512-") and len(base64.b64decode(pin["integrity"][7:])) == 64
    assert set(pin["files"]) == {"uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"}
    for name, digest in pin["files"].items():
        assert hashlib.sha256(ASSETS.joinpath(name).read_bytes()).hexdigest() == digest, name
    header = ASSETS.joinpath("uPlot.iife.min.js").read_text()[:80]
    assert header.startswith(f"/*! https://github.com/leeoniya/uPlot (v{pin['version']}) */")
    assert "MIT License" in ASSETS.joinpath("uPlot.LICENSE").read_text()
    # the script that re-vendors it reads the same pin
    assert "VENDOR.json" in (REPO_ROOT / "requirements" / "vendor_js.sh").read_text()


def test_the_assets_ship_with_the_package():
    setup = (REPO_ROOT / "setup.py").read_text()
    assert '"tools/report/assets/*"' in setup and "gtpo-report = gtpo_verl.tools.report.cli:main" in setup


class Scripts(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts, self.csp, self._in = [], None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.csp = attrs["content"]
        if tag == "script":
            self._in = [attrs.get("type"), ""]

    def handle_data(self, data):
        if self._in is not None:
            self._in[1] += data

    def handle_endtag(self, tag):
        if tag == "script" and self._in is not None:
            self.scripts.append(tuple(self._in))
            self._in = None


def test_the_page_inlines_uplot_and_admits_only_its_own_scripts(tmp_path):
    hostile = "</script><script>alert(1)</script><!--"
    page = write_report({hostile: FIXTURES / "cpu_run_metrics" / "DAPO_SEQ_seed0.jsonl"}, tmp_path / "r.html")
    parser = Scripts()
    parser.feed(page.read_text())
    kinds = [kind for kind, _ in parser.scripts]
    assert kinds == ["application/json", None, None]  # the data, uPlot, the page's script: nothing else
    data, uplot, own = (text for _, text in parser.scripts)
    assert uplot == ASSETS.joinpath("uPlot.iife.min.js").read_text()
    assert own == ASSETS.joinpath("report.js").read_text()
    assert json.loads(data)["runs"][0]["name"] == hostile  # escaped in the file, intact once parsed
    assert parser.csp.startswith("default-src 'none'; script-src ")
    allowed = set(re.findall(r"'sha256-([A-Za-z0-9+/=]+)'", parser.csp))
    assert allowed == {base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() for s in (uplot, own)}
    assert "connect-src" not in parser.csp and "http" not in parser.csp  # default-src 'none' covers every fetch
