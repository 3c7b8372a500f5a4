#!/usr/bin/env bash
# System packages some tests need, from Debian: the protobuf compiler and library (the C++
# IR reader test), Graphviz (DOT -> SVG/PNG), Chromium (HTML viewer and report tests), and
# cmake, make and patch with g++ and protobuf to build ASTRA-sim from the offline tarball
# (irbridge/converters/chakra/astrasim.py; the slow suite builds it once per machine).
set -euo pipefail
packages=(protobuf-compiler libprotobuf-dev g++ graphviz chromium cmake make patch)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
