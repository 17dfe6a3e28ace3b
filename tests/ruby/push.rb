# ruby push.rb <redis-url> [arg]: pushes EchoJob(arg) with Sidekiq's own client
# (no fairjob wake-up token) and prints {"jid": ...}.
require_relative 'common'

arg = ARGV[1] || 'from-ruby'
jid = Sidekiq::Client.push('class' => 'EchoJob', 'args' => [arg])
abort('Sidekiq::Client.push returned nil') if jid.nil?
puts JSON.generate('jid' => jid)
