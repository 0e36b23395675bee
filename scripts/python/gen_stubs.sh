#!/usr/bin/env bash
# Generates Python gRPC stubs of the toolgate API, for tests written in Python.
#
#   scripts/python/gen_stubs.sh PYTHON OUT_DIR
#
# PYTHON is an interpreter with grpcio-tools installed (it brings protoc and the
# google/protobuf well-known types). OUT_DIR receives
#   toolgate/v1/toolgate_pb2.py, toolgate_pb2.pyi, toolgate_pb2_grpc.py
# and, when PYTHON cannot already import google.api.annotations_pb2 (from the
# googleapis-common-protos package), google/api/{annotations,http}_pb2.py too.
# Put OUT_DIR on sys.path, then: from toolgate.v1 import toolgate_pb2, toolgate_pb2_grpc
set -euo pipefail

if [[ $# -ne 2 ]]; then
	echo "usage: $0 PYTHON OUT_DIR" >&2
	exit 2
fi
python=$1
out=$2
# Keep a relative interpreter path valid after the cd below (no symlink
# resolution: a venv's bin/python must keep its path).
if [[ $python == */* ]]; then
	python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python")
fi

if ! "$python" -c 'import grpc_tools.protoc' 2>/dev/null; then
	echo "gen_stubs.sh: $python cannot import grpc_tools (pip install grpcio-tools)" >&2
	exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

cd "$(dirname "$0")/../.."

# google/api/annotations.proto and http.proto (idempotent).
scripts/googleapis.sh

protos=(toolgate/v1/toolgate.proto)
if ! "$python" -c 'import google.api.annotations_pb2' 2>/dev/null; then
	protos+=(google/api/annotations.proto google/api/http.proto)
fi

# grpc_tools' own include directory holds google/protobuf/*.proto.
wkt=$("$python" -c 'import importlib.resources as r; print(r.files("grpc_tools") / "_proto")')

"$python" -m grpc_tools.protoc \
	-I proto \
	-I third_party/googleapis \
	-I "$wkt" \
	--python_out="$out" \
	--pyi_out="$out" \
	--grpc_python_out="$out" \
	"${protos[@]}"

echo "gen_stubs.sh: Python stubs of ${protos[*]} in $out"
