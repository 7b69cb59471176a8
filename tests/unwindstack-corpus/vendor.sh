#!/bin/sh
# Copies libunwindstack's recorded unwinds (AOSP system/unwinding, libunwindstack/offline_files)
# into cases/: the arm, arm64 and x86_64 cases built from AOSP's own sources, and the files of
# common/ they link to. Left out: the cases of proprietary apps (YouTube, YT Music, Photos, Maps)
# and of architectures this project does not unwind (x86, riscv64). Files the corpus keeps
# uncompressed are gzipped; the reader takes NAME or NAME.gz.
#
# usage: vendor.sh GIT_DIR [REF]   (GIT_DIR: a clone of a mirror such as
#        github.com/msft-mirror-aosp/platform.system.unwinding; REF defaults to main)
set -eu
git_dir=$1
ref=${2:-main}
here=$(cd "$(dirname "$0")" && pwd)
out=$here/cases
rm -rf "$out"
mkdir -p "$out"
base=libunwindstack/offline_files
# File by file: a mirror may lack some blobs (large files); those are listed in MISSING.
git --git-dir="$git_dir" ls-tree -r "$ref" "$base" | while read -r _ _ blob path; do
    rel=${path#"$base"/}
    mkdir -p "$out/$(dirname "$rel")"
    git --git-dir="$git_dir" cat-file blob "$blob" > "$out/$rel" 2>/dev/null \
        || { rm -f "$out/$rel"; echo "$rel" >> "$out/MISSING"; }
done
cd "$out"
rm -rf ./*_x86 ./*_riscv64 youtube_* yt_music_* photos_* maps_compiled_*
if [ -f MISSING ]; then
    grep -v -e '_x86/' -e '_riscv64/' -e '^youtube_' -e '^yt_music_' -e '^photos_' \
        -e '^maps_compiled_' -e '^common/' MISSING > MISSING.kept || true
    mv MISSING.kept MISSING
fi
# common/: only what the kept cases link to.
keep=$(cat ./*/links.txt ./*/*/links.txt 2>/dev/null | awk '{print $1}' | sed 's|.*/common/||' | sort -u)
for f in common/*; do
    name=$(basename "$f" .gz)
    echo "$keep" | grep -qx "$name" || rm "$f"
done
find . -type f ! -name '*.gz' ! -name '*.txt' -size +4k -exec gzip -9n {} \;
git --git-dir="$git_dir" rev-parse "$ref" > SOURCE
echo "$ref of libunwindstack/offline_files" >> SOURCE
du -sh "$out"
