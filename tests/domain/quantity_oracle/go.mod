module imex-webhook.io/tests/quantityoracle

go 1.26.0

require k8s.io/apimachinery v0.37.2

require (
	github.com/fxamacker/cbor/v2 v2.9.1 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
	sigs.k8s.io/json v0.0.0-20250730193827-2d320260d730 // indirect
)
