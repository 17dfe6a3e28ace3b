# ruby signal.rb <redis-url> <identity> quiet|stop: what the Web UI's Quiet and
# Stop buttons do (push TSTP / TERM onto <identity>-signals).
require_relative 'common'

identity = ARGV[1]
p = Sidekiq::ProcessSet.new.find { |x| x.identity == identity }
raise "no process #{identity}" unless p
ARGV[2] == 'stop' ? p.stop! : p.quiet!
puts JSON.generate({ 'sent' => ARGV[2] })
