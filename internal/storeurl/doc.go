// Package storeurl knows the schemes of the store URLs a program can open,
// each with its own check of a URL, without anything that opens a store:
// package config validates server.store with it and stays free of the
// stores' dependencies. The stores register their schemes through
// store.Register, which registers the check here.
package storeurl
