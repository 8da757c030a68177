"""opptune.bench_suite"""
