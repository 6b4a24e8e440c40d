"""Who published a calibration row: its publisher family (`family_of`: who measured it with
which harness, the groups leave-one-family-out holds out) and its publication (`source_key`:
one page's snapshots and translations counted as one source).
"""

from __future__ import annotations

import re

# Who measured a source with which harness (first match wins): one family may span many
# pages (all of GPUStack's performance lab is one harness, one client, one set of habits),
# so leave-one-family-out holds them out together. Sources no pattern names fall back to
# their publisher: a URL's domain, or a repository's owner.
FAMILY_PATTERNS = (
    (r"gpustack", "gpustack"),
    (r"docs\.nvidia\.com/nim", "nvidia-nim"),
    (r"nvidia/tensorrt-llm docs/source/performance", "nvidia-trtllm-perf-docs"),
    (r"nvidia/tensorrt-llm docs/source/blogs|developer\.nvidia\.com/blog", "nvidia-trtllm-blogs"),
    # InferenceX's harness wherever its results are published: SemiAnalysis's dashboard
    # data, a re-run of its scripts on a Nebius cluster, the Kimi-K2.5 vLLM recipe's tables
    # (credited there to InferenceX).
    (r"semianalysis|inferencex|inferencemax|heyram74/nebius|recipes moonshotai/kimi-k2\.5",
     "inferencex"),
    # AMD's own vLLM measurements: the ROCm vLLM image's README and the performance-results
    # page that republishes its tables.
    (r"amd\.com/.*/rocm-hub|rocm/vllm docs/dev-docker", "amd-rocm-results"),
    (r"rocm\.blogs\.amd\.com|rocm/rocm-blogs", "amd-rocm-blogs"),
    (r"lm-sys|lmsys\.org", "lmsys"),
    (r"sgl-project/sglang", "sglang-docs"),
    (r"blog\.vllm\.ai|vllm-project/vllm-project\.github\.io|vllm-project/recipes"
     r"|buildkite\.com/vllm", "vllm-project"),
    (r"vllm-project/vllm", "vllm-github"),
    (r"mlcommons|mlperf", "mlperf"),
)


def family_of(source: str) -> str:
    """The publisher family of a source (`FAMILY_PATTERNS`, else its domain or owner)."""
    low = source.lower()
    for pattern, family in FAMILY_PATTERNS:
        if re.search(pattern, low):
            return family
    if m := re.match(r"https?://(?:www\.)?([^/]+)", low):
        return m.group(1)
    return low.split("/")[0].split()[0] if low else "unknown"


def source_key(source: str) -> str:
    """The publication a row comes from: its `source` without a locale or snapshot note, so
    one page's snapshots and translations (AMD's en/ja/zh-cn results page) are one source and
    leave-one-source-out never fits on a copy of what it holds out."""
    text = re.sub(r"\s*\(.*\)\s*$", "", source.strip())
    return re.sub(r"amd\.com/[a-z]{2}(-[a-z]{2})?/", "amd.com/", text)
