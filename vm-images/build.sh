#!/bin/bash
# Build all lab images (cached). Usage: vm-images/build.sh [OUT_DIR] (default <repo>/build/vm-images)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/guest/build.sh" "$@"
"$here/labhost/build.sh" "$@"
