module cgo

go 1.21
