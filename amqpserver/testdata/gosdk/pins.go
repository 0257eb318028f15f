//go:build pins

// This file is never built: it keeps the SDK packages whose tests run.go
// compiles in go.mod and go.sum (go mod tidy keeps them: it reads every
// build tag).
package main

import (
	_ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	_ "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)
