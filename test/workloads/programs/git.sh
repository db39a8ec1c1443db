#!/bin/bash
# git.sh: a repository made, committed twice and read back. The test fixes
# the author, committer and dates, so every hash is the same every run.
set -eu
git init -q -b main repo
cd repo
for i in $(seq 1 20); do
	seq 1 "$((i * 50))" > "file$i.txt"
done
git add .
git commit -q -m "twenty files"
sed -i 's/^1$/one/' file*.txt
git rm -qf file20.txt
git commit -q -am "one, and no file20"
git log --stat --format='%H %an <%ae> %ad%n%s'
git rev-list --count HEAD
git cat-file -p HEAD:file3.txt | head -3
git fsck --no-progress 2>&1
echo "status: $(git status --porcelain | wc -l) changes"
