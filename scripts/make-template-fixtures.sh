#!/bin/sh
# Copies the chat template fixtures of server/testdata/templates from a
# llama.cpp checkout (its models/templates holds model publishers' templates).
set -eu
src=${1:?usage: make-template-fixtures.sh LLAMA_CPP_DIR}/models/templates
dst=$(dirname "$0")/../server/testdata/templates
cp "$src/meta-llama-Llama-3.1-8B-Instruct.jinja" "$dst/llama3.1.jinja"
cp "$src/Qwen-Qwen2.5-7B-Instruct.jinja" "$dst/qwen2.5.jinja"
cp "$src/mistralai-Mistral-Nemo-Instruct-2407.jinja" "$dst/mistral-nemo.jinja"
cp "$src/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja" "$dst/deepseek-r1.jinja"
