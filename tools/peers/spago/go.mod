module github.com/qkv-dev/qkv/tools/peers/spago

go 1.26.8

require github.com/nlpodyssey/spago v1.1.0

require github.com/google/flatbuffers v23.5.26+incompatible // indirect
