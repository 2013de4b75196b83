# bench/plot.gp: docs/performance.png from bench/compare.sh's .dat files.
#
#   OUT=/tmp/cmp bench/compare.sh
#   gnuplot -e "dir='/tmp/cmp'; out='docs/performance.png'" bench/plot.gp
#
# Left: lookup response GB/s (10^9) vs response size, ember (requests batched,
# and each alone) and ucx_perftest ucp_am_bw, tcp and shared memory, the PS's own pooling ceiling, and what one
# core gathers of the same rows with nothing else to do (row_gather).  Right: allreduce busbw vs size, ember
# (host ring), Open MPI MPI_Allreduce and gloo, 2 and 4 ranks, shared memory
# (ember sm,self, Open MPI vader; gloo is TCP only).
if (!exists("dir")) dir = "."
if (!exists("out")) out = "performance.png"
set terminal pngcairo size 1500,600 font ",10"
set output out
set multiplot layout 1,2
set logscale x 2
set grid
set key top left
set format x "%.0s%cB"

set title "lookup: response bandwidth vs response size (1 client, 1 PS, window 16)"
set xlabel "response size (bytes, one shard)"
set ylabel "GB/s (10^9 B/s)"
plot dir."/lookup-sm.dat"  using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "ember lookup sm", \
     dir."/lookup-sm.dat"  using 1:3 with linespoints lw 1 pt 6 dt 2 lc rgb "#1f77b4" title "ucp\\_am\\_bw sm", \
     dir."/lookup-tcp.dat" using 1:2 with linespoints lw 2 pt 5 lc rgb "#d62728" title "ember lookup tcp", \
     dir."/lookup-tcp.dat" using 1:3 with linespoints lw 1 pt 4 dt 2 lc rgb "#d62728" title "ucp\\_am\\_bw tcp", \
     dir."/lookup-sm.dat"  using 1:7 with linespoints lw 1 pt 1 lc rgb "#17becf" title "ember lookup sm, each request alone (--batch 0)", \
     dir."/lookup-tcp.dat" using 1:7 with linespoints lw 1 pt 2 lc rgb "#ff7f0e" title "ember lookup tcp, each request alone (--batch 0)", \
     dir."/lookup-sm.dat"  using 1:4 with lines lw 1 dt 3 lc rgb "#2ca02c" title "PS pooling ceiling (resp / ps\\_us), sm", \
     dir."/lookup-sm.dat"  using 1:5 with lines lw 1 dt 4 lc rgb "#7f7f7f" title "one core gathering the same rows, nothing else (row\\_gather)", \
     dir."/lookup-sm.dat"  using 1:6 with lines lw 1 dt 5 lc rgb "#bcbd22" title "the same, the other core reading each output as the client does"

set title "allreduce: busbw vs size (shared memory; gloo over TCP)"
set xlabel "size (bytes)"
set ylabel "busbw (GB/s, log)"
set logscale y 10
set format y "%g"
plot dir."/ar-sm-2.dat" using 1:2 with linespoints lw 2 pt 7 lc rgb "#1f77b4" title "ember host, 2 ranks", \
     dir."/ar-sm-2.dat" using 1:3 with linespoints lw 1 pt 6 dt 2 lc rgb "#1f77b4" title "Open MPI, 2 ranks", \
     dir."/ar-sm-2.dat" using 1:4 with linespoints lw 1 pt 8 dt 3 lc rgb "#1f77b4" title "gloo, 2 ranks", \
     dir."/ar-sm-4.dat" using 1:2 with linespoints lw 2 pt 5 lc rgb "#d62728" title "ember host, 4 ranks", \
     dir."/ar-sm-4.dat" using 1:3 with linespoints lw 1 pt 4 dt 2 lc rgb "#d62728" title "Open MPI, 4 ranks", \
     dir."/ar-sm-4.dat" using 1:4 with linespoints lw 1 pt 10 dt 3 lc rgb "#d62728" title "gloo, 4 ranks"
unset multiplot
